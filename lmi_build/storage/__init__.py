"""Publishing artifacts to S3 and pulling them back (``publish.py``, ``pull.py``), verified
against the artifact manifest; the manifest object is the commit marker."""
