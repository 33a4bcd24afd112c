"""The report layer: the command line and what it writes, above the gate and the simulator.

Rooms, each named for what it holds:

- ``cli``: the ``specgauge`` dispatcher and one module per subcommand (with the
  simulation options and the console printing);
- ``planning``: the plan's decisions read off simulated rows, its SLOs, the acceptance
  rates a plan is given (``--acceptance``), and the ranking of measured drafts;
- ``figures``: the PNGs beside a report's CSV (law, plan, measured acceptance);
- ``sweeps``: the executors that run a sweep (serial, processes, Dask), with the
  resumable journal and the lock on its CSV.

The CSV itself is written by ``specgauge.csvio``; the certificate figures belong to the
gate (``specgauge.stattests.chain.figures``); the acceptance measurement is its own
package, ``specgauge.measurement``. Only ``cli`` imports the other rooms.
"""
