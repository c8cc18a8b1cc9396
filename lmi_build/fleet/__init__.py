"""Build fleets: a matrix of builds run by a local process pool or Ray, sharing an S3 build cache."""
