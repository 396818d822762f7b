"""Per-paper study settings: which runs each profile makes, and the tables/figures drawn from them.

Notebooks hold only a parameters cell and calls into these modules, so the small-data profiles
are settings the package understands rather than branches inside notebooks.
"""
