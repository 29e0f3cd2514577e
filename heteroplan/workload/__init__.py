"""Jobs and workload readers/generators.

- :mod:`heteroplan.workload.job_spec`: :class:`JobSpec`, one job of a workload.
- :mod:`heteroplan.workload.sia`: Sia workload CSVs (``name,time,application,num_replicas,batch_size``).
- :mod:`heteroplan.workload.gavel`: Gavel throughputs and Gavel-style generated workloads.
- :mod:`heteroplan.workload.newtrace`: generated workloads in the Sia paper's newTrace setting.
- :mod:`heteroplan.workload.rigid`: rigid task-level jobs with per-type throughputs (Gavel, Hadar).
"""
