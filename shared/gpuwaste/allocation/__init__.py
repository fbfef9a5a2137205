"""Allocation: pure resolvers that answer "which pod holds which share of which physical GPU, from when to when".

Each way Kubernetes hands out a GPU (device-plugin requests, MIG profiles, time-slicing/MPS replicas,
DRA ResourceClaims, HAMi shares, KAI/Run:ai fractions, vGPU guests) is one resolver module in this package
implementing `AllocationResolver` (see `base.py`). The join (`gpuwaste.join`) asks every resolver that
applies to the cluster and merges their holdings. Adding the next scheduler is one new resolver.
"""
