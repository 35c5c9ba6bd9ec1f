"""`specsched serve`'s flags: the run flags, where to listen and what a request may ask, checked before any
model loads (the server itself: serve_commands.py)."""

from __future__ import annotations

import argparse

from ...core.config import MODEL_BACKENDS, ConfigError, Mode, RunConfig
from ...core.config_checks import MAX_NEW_TOKENS
from ...models.registry import DEFAULT as DEFAULT_PAIR
from ..run.flag_config import config_from_args
from ..run.flags import add_run_flags
from .requests import Limits

API_KEY_ENV = "SPECSCHED_API_KEY"  # the key from the environment keeps it out of `ps` (argv is public)
# run flags that mean nothing to a server: each request brings its prompts and its n
NOT_SERVED = {"prompts": "--prompt (each request brings its own)", "workers": "--workers (a request's n is its own)",
              "json": "--json (GET /metrics reports the traffic)", "priorities": "--priorities (a request's "
              "priority is its own: the specsched.priority field)"}


def add_serve_parser(sub) -> None:
    p = sub.add_parser("serve", help="an OpenAI-compatible HTTP server on one engine (docs/serve.md)",
                       description="Serve /v1/completions and /v1/chat/completions (streaming with stream: true), "
                                   "/v1/models, /health and /metrics. The run flags set the engine and each "
                                   "request's defaults.")
    p.add_argument("--host", default="127.0.0.1", help="where to listen (0.0.0.0: every interface; use --api-key)")
    p.add_argument("--port", type=int, default=8000, help="the port; 0 = a free one (printed)")
    p.add_argument("--api-key", default=None, metavar="KEY",
                   help=f"requests must send Authorization: Bearer KEY (default: ${API_KEY_ENV} if set, else none)")
    d = Limits()
    p.add_argument("--max-body-bytes", type=int, default=d.max_body_bytes, metavar="B",
                   help="larger request bodies get 413")
    p.add_argument("--max-tokens-limit", type=int, default=d.max_tokens, metavar="M",
                   help="the most max_tokens a request may ask")
    p.add_argument("--max-n", type=int, default=d.max_n, metavar="N", help="the most sequences (n) per prompt")
    p.add_argument("--max-workers", type=int, default=64, metavar="N",
                   help="draft workers the engine runs at most (requests beyond wait for one to come free)")
    p.add_argument("--prestart", type=int, default=1, metavar="N",
                   help="draft workers loaded before the first request, so that it does not wait for a model")
    p.add_argument("--model-name", default=None, metavar="ID",
                   help="the model id clients send (default: the target's preset or path; sim on --backend sim)")
    p.add_argument("--trace", default=None, metavar="PATH",
                   help="record the requests as one workload, written when the server stops, for `specsched "
                        "replay`, `export` and `whatif` (--mode seed)")
    p.add_argument("--no-live", action="store_true",
                   help="no live view on a terminal: a line per request, as when the output is not a terminal")
    add_run_flags(p)
    p.set_defaults(func=".serve.serve_commands:cmd_serve")


def serve_config(args: argparse.Namespace) -> RunConfig:
    for name, flag in NOT_SERVED.items():
        if getattr(args, name, None):
            raise ConfigError(f"serve takes no {flag}")
    config = config_from_args(args)
    if args.trace and config.mode != Mode.SEED:
        raise ConfigError(f"--trace records a server's jobs as one --mode seed run (a worker per sequence); this "
                          f"server's is --mode {config.mode}")
    return config


def limits_of(args: argparse.Namespace) -> Limits:
    for flag, value in (("--max-body-bytes", args.max_body_bytes), ("--max-tokens-limit", args.max_tokens_limit),
                        ("--max-n", args.max_n)):
        if value < 1:
            raise ConfigError(f"{flag} must be at least 1, got {value}")
    if args.max_tokens_limit > MAX_NEW_TOKENS:
        raise ConfigError(f"--max-tokens-limit must be at most {MAX_NEW_TOKENS:,}, got {args.max_tokens_limit:,}")
    return Limits(args.max_body_bytes, args.max_tokens_limit, args.max_n)


def model_name(args: argparse.Namespace, config: RunConfig) -> str:
    if args.model_name is not None:
        if not args.model_name.strip():
            raise ConfigError("--model-name is empty")
        return args.model_name
    return config.target or (DEFAULT_PAIR if config.backend in MODEL_BACKENDS else config.backend)
