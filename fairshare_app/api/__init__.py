"""REST API of fairshare_app, mounted at /api/v1/fairshare/ (kaiplatform/urls.py)."""
