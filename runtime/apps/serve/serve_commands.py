"""`specsched serve`: one engine kept up behind the HTTP server.

Bad flags are one line and exit status 2 before any model loads; the port is bound before the models
load too, so a port that is taken costs nothing. On a terminal the server shows the live view of its traffic
(view/traffic.py: jobs coming and going on the draft processes' rows) with its log of one line per request
above it; elsewhere, or with --no-live, the log alone. Ctrl-C or SIGTERM stops the server: requests still
running end (their jobs interrupted), every process stops, `--trace` is written, and the command exits 130 or
143 as every command does (docs/cli.md).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import time

from rich.console import Console
from rich.text import Text

from ...core.config import ConfigError
from ...engine.collected import Interrupted
from ...engine.engine import Engine
from ...engine.stopping import stopped_by
from ..run.exits import EXIT_FAILED, fail
from ..view.live import choose_view
from ..view.traffic import LOOK_S, Traffic, TrafficMonitor
from ..view.usage import UsageSampler
from .recording import Recording
from .routes import ServeApp
from .serve_cli import API_KEY_ENV, limits_of, model_name, serve_config
from .server import Server, bind


def cmd_serve(args: argparse.Namespace, console: Console) -> int:
    config, limits = serve_config(args), limits_of(args)
    if not 0 <= args.prestart <= args.max_workers:
        raise ConfigError(f"--prestart must be in 0..--max-workers ({args.max_workers}), got {args.prestart}")
    key = args.api_key if args.api_key is not None else os.environ.get(API_KEY_ENV) or None
    if key is not None and not key.strip():
        raise ConfigError("--api-key is empty")
    model = model_name(args, config)
    recording = Recording(args.trace, config) if args.trace else None
    server, signal_name = None, None
    sock = bind(args.host, args.port)
    try:
        with Engine(dataclasses.replace(config, workers=1), max_workers=args.max_workers) as engine:
            if args.prestart:
                engine.start_workers(args.prestart)
            traffic = Traffic(engine)
            view = choose_view(console, TrafficMonitor(traffic, config, UsageSampler(keep=False)),
                               enabled=not args.no_live, lines=False)  # not on a terminal: the log alone

            def on_job(job, cfg) -> None:
                if view:
                    traffic.watch(job, cfg)
                if recording:
                    recording.add(job)

            app = ServeApp(engine, config, model=model, limits=limits, api_key=key, on_job=on_job,
                           log=None if args.quiet else lambda line: console.print(Text(line), highlight=False))
            server = Server(app.app, args.host, sock=sock).start()
            _announce(console, server, model, config, key)
            try:
                _watch(server, view, traffic)
            except (KeyboardInterrupt, Interrupted) as exc:  # the command ends 130 / 143, as every command does
                signal_name, reason = stopped_by(exc)
                console.print(Text(f"stopping ({'SIGTERM' if isinstance(exc, Interrupted) else 'Ctrl-C'}) …",
                                   style="dim"), highlight=False)
                engine.close(reason)  # first: the requests still running end (interrupted, naming the signal), so
                raise                 # their answers end before the server stops taking connections
            finally:
                server.stop()
    finally:
        sock.close()
        if recording and server:  # the engine has closed: every job has its record, those cut short by the stop too
            _write(recording, console, signal_name)
    # only a signal stops a server: its thread ending by itself means uvicorn gave up (its log says why)
    fail("the HTTP server stopped by itself")
    return EXIT_FAILED


def _announce(console: Console, server: Server, model: str, config, key: str | None) -> None:
    if not key and server.host not in ("127.0.0.1", "localhost", "::1"):
        console.print(Text(f"warning: listening on {server.host} without an API key: anyone who can reach this port "
                           "can run jobs (--api-key)", style="yellow"), highlight=False)
    console.print(Text(f"serving {model} on {server.url} · policy {config.policy} · backend {config.backend} · "
                       f"{'API key required' if key else 'no API key'} · Ctrl-C stops", style="bold"), highlight=False)


def _watch(server: Server, view, traffic: Traffic) -> None:
    """Until the server stops (a signal): the live view, if any, redrawn from the traffic."""
    with view or contextlib.nullcontext():
        try:
            while server.running:
                if view:
                    view.update(traffic.look())
                time.sleep(LOOK_S)
        finally:
            if view:  # its last frame: the traffic as the stop found it
                traffic.look()


def _write(recording: Recording, console: Console, signal_name: str | None) -> None:
    try:
        console.print(Text(recording.write(signal_name)), highlight=False)
    except OSError as exc:  # checked when the server started, but a disk can fill
        fail(f"cannot write --trace {recording.path} ({exc.strerror or exc})")
