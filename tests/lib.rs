//! Nothing to link: the scenarios live in `scenarios/`, one module per seed incident.
