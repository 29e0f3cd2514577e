"""The planner's machine model: what a plan costs in time, memory and money.

Named cost terms, each written once and vectorised over layer ranges (:mod:`.terms`, transfers in
:mod:`.comm`, the 1F1B schedule in :mod:`.pipeline_replay`, stragglers in :mod:`.straggler`),
per-platform constants (:mod:`.sim_config`, fitted by :mod:`.calibration`), their tables over all
layer ranges for the search (:mod:`.stage_tables`), the communication around the pipeline
assembled once for both (:mod:`.sync`), and their evaluation on one plan
(:mod:`.simulator`). Never imports :mod:`heteroplan.planner.search`.
"""
