"""Analysis: pure computation over a trace, in data-flow order: ``trace`` → ``policies`` →
``structure`` → ``simulation`` → ``curves``; ``cost`` prices what they find.

Never imports torch, and never writes the warehouse: the stages (``prefixscope.stages``) load
inputs, call these functions and store what they return.
"""
