"""The planner's search: the best plan of one job over a pool of GPUs, priced by the machine
model (:mod:`heteroplan.planner.model`).

:mod:`.searcher` scans microbatch sizes, data- and pipeline-parallel degrees and block layouts;
:mod:`.split_dp` chooses the layer split of a layout exactly; :mod:`.mixed_stages` and
:mod:`.mixed_scan` search stages that mix GPU types; :mod:`.resources` narrows the pool with a
MILP; :mod:`.brute_force` is the exhaustive oracle the tests compare the search with.
"""
