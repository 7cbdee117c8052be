"""Kubernetes routes: snapshot import and the kube-scheduler extender."""

from fastapi import APIRouter

router = APIRouter()
