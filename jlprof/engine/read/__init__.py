"""Stage 1, read: nsys SQLite exports, nvprof databases and jlprof's own store into typed frames."""
