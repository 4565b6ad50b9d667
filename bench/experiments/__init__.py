"""One-off experiments: each answers one question once, on demand, outside `python -m bench all`.

What belongs here: a measurement that informed a decision (a change adopted or rejected) and is
kept so the figure quoted for it can be re-made, but that no table of BENCHMARKS.md is
generated from and no stage runs. Each module is `python -m bench.experiments.NAME`, prints
what it measured and writes nothing under bench/results/. A figure quoted from one names that
command. What the report publishes (the evaluation, the agent loop, perf) stays in `bench/`.

  ceiling           how far learning can lift held-out top-1 with a perfect teacher, and the
                    ranker families tried against the fold (nearest exemplar, prior, linear
                    head, query adapter)
  previous_hashing  the hashing embedder's single-query path before `mmh3` against today's
  multiturn_baseline  BFCL's multi-turn turns ranked with no learning (the baseline the
                    conversation signals were measured against)
  narrowing         what each framework integration's narrowing adds over its rank request
  volume            a million turns of usage labels through one in-process service: turns/s
                    and the exemplar caps
  repeated_usage    each learn-half request sent several times by agents sometimes wrong: the
                    share of requests whose usage label ends right (the running majority)
  composed_query    the narrowing's query with the earlier conversation glued on, against the
                    message alone and the server's fitted context (why `context_chars` is 0)
  settings_import   what pydantic-settings would add to the exec selector's start (why
                    `Settings` declares its fields without it)
"""
