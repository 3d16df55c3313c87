"""What hf_models.py and hf_bert.py share: our initial weights into a
transformers model, its AdamW with our flags, and the comparison of the
step losses and of the weights after the steps. Each caller loads this file
by path (its folder is off sys.path: see hf_models.py) and brings what
differs, the model, the names and its batches."""
import json
import sys

import numpy as np
import torch


def load_ours(model, init, hf_name, npdtype, who):
    """init (our name -> array) into model under HF's names; its parameters
    by name. Buffers (rotary frequencies, masks) and tied copies are not
    weights, so only a missing parameter or an unexpected name fails."""
    state = {hf_name(n): torch.from_numpy(np.array(t, dtype=npdtype)) for n, t in init.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    params = dict(model.named_parameters())
    lost = [n for n in missing if n in params]
    if lost or unexpected:
        sys.exit("%s: weights do not match %s: missing %s, unexpected %s"
                 % (who, type(model).__name__, lost, unexpected))
    return params


def adamw(params, args):
    """torch's AdamW as our runtime runs it: weight decay on matrices only."""
    decay = [p for p in params.values() if p.dim() >= 2]
    other = [p for p in params.values() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                              {"params": other, "weight_decay": 0.0}],
                             lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps)


def compare_losses(ours_path, hf_losses, tol):
    """Our --log-json losses against HF's, step by step; whether all hold."""
    ours = [json.loads(line)["loss"] for line in open(ours_path) if line.strip()]
    ok = len(ours) == len(hf_losses)
    print("step  ours                HF                  |diff|")
    for i, (a, b) in enumerate(zip(ours, hf_losses)):
        d = abs(a - b)
        ok = ok and d <= tol
        print("%4d  %.15f  %.15f  %.2e%s" % (i + 1, a, b, d, "" if d <= tol else "  FAIL"))
    return ok


def compare_after(model, params, final, hf_name, npdtype, eval_loss, steps, tol, skip, skipped):
    """HF's loss on the next window (eval_loss) with its own weights after
    the steps and with ours (final), which must agree within tol; the
    weights themselves are reported only, their largest difference overall
    and over the tensors whose names hold no `skip` (a bias whose gradient
    is zero up to rounding, which AdamW's g/sqrt(v) turns into full-size
    steps of either sign on either side)."""
    hf_after = eval_loss()
    worst, worst_name, rest = 0.0, None, 0.0
    for n, t in final.items():
        hf = params[hf_name(n)].detach().numpy().astype(np.float64)
        t = np.array(t, dtype=np.float64)
        rel = float(np.linalg.norm(t - hf) / max(np.linalg.norm(hf), 1e-30))
        if rel > worst:
            worst, worst_name = rel, n
        if skip not in n:
            rest = max(rest, rel)
    model.load_state_dict({hf_name(n): torch.from_numpy(np.array(t, dtype=npdtype))
                           for n, t in final.items()}, strict=False)
    ours_after = eval_loss()
    d = abs(ours_after - hf_after)
    print("after %d steps, HF's loss on the next window: with our weights %.15f, with its own "
          "%.15f, |diff| %.2e%s" % (steps, ours_after, hf_after, d, "" if d <= tol else "  FAIL"))
    print("final weights (reported, not checked): largest |ours - HF| / |HF| %.2e (%s); "
          "%.2e over the tensors other than %s" % (worst, worst_name, rest, skipped))
    return d <= tol
