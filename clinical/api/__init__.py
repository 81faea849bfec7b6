"""REST API for EHR systems (Django REST framework, async views via adrf)."""
