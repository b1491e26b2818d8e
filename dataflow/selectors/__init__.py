"""Reads: every figure and list the admin, the REST API, the dashboard and the management
commands show. Selectors read and never write; they import models, the services' context
and errors, and domain services (stalls), never the flow facade, the run engine or tasks.

- ``runs``: where a run is and what it says, its live counters, records/s and duration, how
  an unbounded run goes, its metric samples, a flow's latest run;
- ``splits``: a run's splits as status rows, and how much of a split was read;
- ``flows``: flow lists with their latest run, a flow's runs, its status, its actions;
- ``visibility``: the flows, runs, dead letters and connections a user may see;
- ``dashboard``: the dashboard's overview and a flow's page.
"""
