"""The core's input and output, and the rules of a value: the snapshot a cycle decides on
and the decisions and reasons it gives (snapshot.py), node affinity, quantities, a GPU
request's charge (gpushare.py), words for people, subgroups, run times. Imports nothing
else of the core."""
