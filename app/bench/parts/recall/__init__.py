"""The recall part: trimmed facts on the reference model, and the recall step's cost.

A folder of its own because the parts folder holds fifteen modules at most; it may
import the app and `app.bench` like any part.
"""
