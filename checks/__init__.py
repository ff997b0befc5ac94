"""The simulator against reality: measured runs beside a scenario's predictions
(validate.py), and the installed gepa on synthetic work of known latency and
acceptance or quality (synthetic.py, synthetic_quality.py) judged against the
simulator (conformance.py, search_conformance.py)."""
