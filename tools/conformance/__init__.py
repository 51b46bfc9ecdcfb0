"""Differential conformance: our listener against ARC's upstream poll loop, same fakes."""
