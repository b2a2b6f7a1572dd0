"""`shapesweep dashboard` (offline HTML report) and `shapesweep serve` (live dashboard)."""

from __future__ import annotations

import argparse
import os

from shapesweep.sweep.options import add_adjust


def add_arguments_dashboard(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("names", nargs="+", metavar="NAME", help="sweep name(s) to report on")
    parser.add_argument("--root", default="./sweeps", help="results root (default ./sweeps)")
    parser.add_argument("--out", default="report.html", help="HTML file to write (default report.html)")
    add_adjust(parser)


def dashboard(args: argparse.Namespace) -> int:
    from shapesweep.dashboards.report import write_report
    from shapesweep.results.multiplicity import check_method

    if args.adjust is not None:
        check_method(args.adjust)
    from shapesweep.common import UserError, check_output

    check_output(args.out, "--out", folder=False)  # before the report is built
    try:
        out = write_report(args.root, list(dict.fromkeys(args.names)), args.out, args.adjust)
    except OSError as error:  # where only writing tells (`/proc/self/x`); the page is whole or absent
        folder = os.path.dirname(os.path.abspath(args.out))
        if not str(error.filename or "").startswith(folder):
            raise
        raise UserError(f"cannot write: {error.strerror or error}", file=args.out,
                        key="--out") from None
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB, opens offline)")
    return 0


def add_arguments_serve(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", default="./sweeps", help="results root (default ./sweeps)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, this machine only)")
    parser.add_argument("--port", type=int, default=8050, help="port (default 8050; 0 picks a free one)")
    parser.add_argument("--poll", type=float, default=3.0, help="seconds between the page's checks for new trials")


def serve(args: argparse.Namespace) -> int:
    from shapesweep.dashboards.server import make_server

    server = make_server(args.root, args.host, args.port, poll_s=args.poll)
    host, port = server.server_address[:2]
    print(f"serving the dashboard for {args.root} at http://{host}:{port}/ (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0
