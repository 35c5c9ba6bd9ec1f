"""`specsched serve`: an OpenAI-compatible HTTP server on one engine (docs/serve.md).

- `errors.py`    an API error and its OpenAI-style body
- `limits.py`    what the server accepts at most (body size, max_tokens, n)
- `requests.py`  a request's JSON, checked, and the job it becomes (`CompletionRequest`)
- `extension.py` the namespaced per-request fields the policy sees (`"specsched": {...}`)
- `shapes.py`    the OpenAI response objects and Server-Sent Events
- `follow.py`    a job's committed tokens as text deltas (stop strings, UTF-8 held back)
- `metrics.py`   /metrics: Prometheus counters and histograms
- `routes.py`    the Starlette app: routes, API key, body limit
- `server.py`    uvicorn on a socket we bound, in a thread (the CLI, tests and the load test)
- `cli.py`       the `serve` subcommand
- `load.py`      `specsched bench serve`: streaming clients under Poisson arrivals
"""
