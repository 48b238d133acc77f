"""``make test``'s nbval run uses the current environment's plain kernel; the in-place notebook
needs the ``jlprof-inplace`` kernel and is run by ``tests/magics/test_inplace.py`` instead."""

collect_ignore_glob = ["inplace/*.ipynb"]
