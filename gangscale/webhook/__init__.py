"""Admission webhooks (docs/webhook.md): refuse gangs that can never run, gate gang pods for capacity.

rules (pure findings) <- admission (AdmissionReview in/out, the JSONPatch) <- server (HTTPS) <- command (CLI).
"""
