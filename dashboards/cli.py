"""`shapesweep dashboard` (offline HTML report) and `shapesweep serve` (live dashboard)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from shapesweep.common import UserError, check_output
from shapesweep.dashboards.report import write_report
from shapesweep.dashboards.server import make_server
from shapesweep.results.multiplicity import check_method

if TYPE_CHECKING:  # types only: the verb table is the command line's, above the dashboards
    from shapesweep.sweep.cli.verb_table import DashboardArgs, ServeArgs


def dashboard(args: DashboardArgs) -> int:
    if args.adjust is not None:
        check_method(args.adjust)

    check_output(args.out, "--out", folder=False)  # before the report is built
    try:
        out = write_report(args.root, list(dict.fromkeys(args.names)), args.out, args.adjust,
                           storage=args.storage)
    except OSError as error:  # where only writing tells (`/proc/self/x`); the page is whole or absent
        folder = os.path.dirname(os.path.abspath(args.out))
        if not str(error.filename or "").startswith(folder):
            raise
        raise UserError(f"cannot write: {error.strerror or error}", file=args.out,
                        key="--out") from None
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB, opens offline)")
    return 0


def serve(args: ServeArgs) -> int:
    server = make_server(args.root, args.host, args.port, poll_s=args.poll, storage=args.storage)
    host, port = str(server.server_address[0]), server.server_address[1]
    print(f"serving the dashboard for {args.root} at http://{host}:{port}/ (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0
