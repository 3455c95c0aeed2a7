"""`unicron-plan serve`: run the coordinator on uvicorn."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def serve(state: Path = typer.Option(..., "--state", help="Directory of the state (SQLite log); created if missing."),
          host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (loopback unless told otherwise)."),
          port: int = typer.Option(8470, "--port", help="TCP port."),
          token_file: Optional[Path] = typer.Option(
              None, "--token-file", help="File holding a bearer token; every request must carry it."),
          solver: Optional[str] = typer.Option(None, "--solver", "-s", help="As for `unicron-plan solve`."),
          no_contingency: bool = typer.Option(False, "--no-contingency",
                                              help="Do not keep warm contingency plans."),
          max_body_mib: float = typer.Option(64.0, "--max-body-mib", help="Largest request body, MiB.")):
    """Serve the planning coordinator over HTTP (docs/service.md)."""
    from unicron_plan.extras import require

    for module in ("uvicorn", "fastapi", "prometheus_client"):
        require(module, "serve")
    import uvicorn

    from unicron_plan.errors import InvalidInstanceError
    from unicron_plan.service.app import create_app

    token = None
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise InvalidInstanceError("--token-file", f"cannot read: {exc}") from None
        if not token:
            raise InvalidInstanceError("--token-file", "the file is empty")
    if solver is not None:
        from unicron_plan.solvers import get_solver

        get_solver(solver)  # unknown names are bad input now, not on the first event
    if not 1 <= port <= 65535:
        raise InvalidInstanceError("--port", f"{port} is outside 1..65535")
    if max_body_mib <= 0:
        raise InvalidInstanceError("--max-body-mib", "must be positive")
    app = create_app(state, token=token, solver=solver, contingency=not no_contingency,
                     max_body_bytes=int(max_body_mib * 1024 * 1024), settle_heap=True)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
