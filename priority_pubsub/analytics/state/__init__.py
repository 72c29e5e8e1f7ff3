"""What earlier runs left for the next one: the state directory and its manifest, written
last, and the lock (``store``); the stored tables read and written through it (``stored``).
"""
