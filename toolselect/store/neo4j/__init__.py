"""The production store: Neo4j over Bolt (`store.Neo4jStore`, opened by `connect.connect_neo4j`), its
transaction functions (`tx`) and the Cypher files they load by name (`cypher`)."""
