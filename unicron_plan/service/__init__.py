"""The planning coordinator: `unicron-plan serve`, an HTTP service over :mod:`unicron_plan.api`.

The cluster's state lives in an append-only SQLite log (``state.py`` replays
it, ``store.py`` writes it); ``app.py`` is the FastAPI application. Plans are
computed only by :func:`unicron_plan.api.solve` (see docs/service.md).
"""
