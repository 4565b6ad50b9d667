"""The learner harness's fixtures, for every module of this folder."""

from tests.learn.test_learner import harness, sqlite_store

__all__ = ["harness", "sqlite_store"]
