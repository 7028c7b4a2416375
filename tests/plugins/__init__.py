"""pytest plugins of the test suite, one per concern, registered by ``tests/conftest.py``."""
