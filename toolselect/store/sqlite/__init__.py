"""The embedded store: one SQLite file (`store.SqliteStore`), its tables (`schema`), the label
writes (`exemplars`) and the analyses' SQL twins (`analytics`)."""
