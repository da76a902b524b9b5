"""The bench runs that chose the image route's tuned values (its parameters objects name them per field).

The figures each run prints are read in docs/templates.md ("The benchmark"); a field's comment says which run
chose it and what was compared.
"""

#: the tuning seed: every threshold and budget of the route was read off this run (and its ``BENCH_VARIANTS``)
TUNING_RUN = "python bench/templates.py --seed 11 --entities 1000 --families x_en,weibo_zh,wechat_zh --baseline"
#: the index at scale: the descriptor index's lists, retrains and probes, and the route's latency at 20,000 images
SCALE_RUN = "python bench/templates.py --seed 23 --entities 20000 --queries-per-template 1"
#: the report seed (never used to choose a value): the figures the docs print
REPORT_RUN = "python bench/templates.py --seed 23 --entities 5000 --queries-per-template 1"
