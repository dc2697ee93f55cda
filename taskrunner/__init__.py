"""A durable task runner on Huey whose unit rows are the truth.

Consumers import ``taskrunner.contract`` only.
"""
