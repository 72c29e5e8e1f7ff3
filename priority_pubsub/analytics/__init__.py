"""The PySpark delivery report (extra ``spark``); never imported by the sidecar."""
