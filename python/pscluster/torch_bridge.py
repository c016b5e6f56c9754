"""A small PyTorch bridge for scheduled functions (CPU, Debian python3-torch).

Pulls come back as leaf tensors that require grad; after loss.backward(),
apply_gradients pushes their .grad to the PS (dense ones in one step, each
embedding lookup's rows in one more), under the closure's lease:

    def train_step(x, y):
        w, b = pscluster.torch_bridge.read([w_var, b_var])
        rows = pscluster.torch_bridge.lookup(emb, ids)        # [batch, dim]
        loss = loss_fn(model(x, w, b, rows), y)
        loss.backward()
        pscluster.torch_bridge.apply_gradients([(w, w_var), (b, b_var), (rows, emb)])

The core package works with NumPy alone; this module imports torch.
"""

import numpy as np
import torch

from pscluster import _variables


def read(variables, requires_grad=True):
    """Pulls `variables` (one request per PS): float32 leaf tensors."""
    arrays = _variables.read(variables)
    return [torch.from_numpy(a).requires_grad_(requires_grad) for a in arrays]


def lookup(embedding, ids, requires_grad=True):
    """Pulls rows `ids` of `embedding`: a leaf tensor of ids.shape + (dim,)
    that remembers its ids for apply_gradients."""
    ids = np.asarray(ids.numpy() if isinstance(ids, torch.Tensor) else ids, dtype=np.int64)
    rows = torch.from_numpy(embedding.lookup(ids)).requires_grad_(requires_grad)
    rows._pscluster_ids = ids
    return rows


def apply_gradients(tensors_and_vars):
    """Pushes each pulled tensor's .grad to its variable: one step for the
    dense ones, one per embedding lookup (row gradients). Tensors without a
    grad are skipped. Returns the number of pushes."""
    pairs = []
    for tensor, var in tensors_and_vars:
        if tensor.grad is None:
            continue
        grad = tensor.grad.detach().cpu().numpy()
        ids = getattr(tensor, "_pscluster_ids", None)
        if ids is not None:
            pairs.append((_variables.IndexedSlices(grad.reshape(-1, grad.shape[-1]),
                                                   ids.reshape(-1)), var))
        else:
            pairs.append((grad, var))
    return _variables.apply_gradients(pairs)
