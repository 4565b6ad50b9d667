import os

from toolselect.client import ApiError, Client

with Client(os.environ.get("TOOLSELECT_URL", "http://127.0.0.1:8080")) as ts:
    ts.tools.put(
        [{"name": "crypto_price", "description": "Price of a cryptocurrency like bitcoin."}],
        pack="assistant",
    )
    ranking = ts.rank("what is the bitcoin price now?", k=3)
    print([(r.tool, round(r.score, 2)) for r in ranking.results])

    # What the agent actually did, with the search it chose from: queued, sent in the
    # background, never raises. A tool that worked becomes a label of its request.
    ts.observe(
        "what is the bitcoin price now?",
        used_tool="crypto_price",
        outcome="ok",
        search_id=ranking.search_id,
    )

    try:
        ts.rank("hi", k=0)
    except ApiError as exc:
        print(exc.status, exc.code, exc.field)  # 422 invalid_request k
# Leaving the block sent the buffered turns.
print(ts.observe_stats)
