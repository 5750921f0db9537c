"""The catalogue benchmark: uncached, cached and 304 answers at 10, 100 and 1,000 servers."""
