"""The model store: the cache's layout, its manifest and lock, and where the catalogue's file lives.
Imports only the shared base."""
