// Block until every index is ONLINE, so the first queries after migrate() use them.
CALL db.awaitIndexes($timeout_s)
