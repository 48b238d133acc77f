"""``jlprof`` sub-commands beside DLProf's command line (``jlprof diff``); each in its own module,
dispatched on the first word by :func:`jlprof.cli.main`."""
