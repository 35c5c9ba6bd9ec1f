"""`specsched serve`: an OpenAI-compatible HTTP server on one engine (docs/serve.md).

- `errors.py`    an API error and its OpenAI-style body
- `requests.py`  a request's JSON, checked field by field (`CompletionRequest`), and the server's `Limits`
- `extension.py` the namespaced per-request fields the policy sees (`"specsched": {...}`)
- `job.py`       the job a request becomes: prompts and settings on the server's defaults, submitted
- `follow.py`    a running job's committed tokens as text deltas (stop strings, split characters held back)
- `answer.py`    a followed job answered whole or as Server-Sent Events
- `shapes.py`    the OpenAI response objects
- `metrics.py`   /metrics: Prometheus counters, gauges and histograms
- `routes.py`    the Starlette app: routes, API key, body limit, errors
- `server.py`    uvicorn on a socket we bound, in a thread (the command, the tests, the load test)
- `recording.py` `--trace`: the requests as one workload trace, written when the server stops
- `serve_cli.py`, `serve_commands.py`  the `serve` subcommand: its flags; the server, its live view (view/traffic.py)
- `load.py`, `load_cli.py`  `specsched bench serve`: streaming clients under Poisson arrivals, per policy
"""
