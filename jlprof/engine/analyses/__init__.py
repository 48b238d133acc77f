"""Questions beyond DLProf's reports, each a module over the correlated trace and iterations."""
