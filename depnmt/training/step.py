"""One optimizer update: Adam (0.9, 0.98, 1e-9) with inverse-square-root warm-up (Vaswani et
al. 2017 §5.3), label smoothing, gradient accumulation over an update's batches, the schemes'
auxiliary losses, gradient clipping and (fp16) loss scaling.

Under ``torchrun`` every rank takes its share of each update: the loss is normalised by the
target tokens of the whole update (summed over the ranks), so W processes with ``--update-freq
F`` train exactly like one with ``--update-freq W·F``. On a GPU an update waits for the device
once: token counts are counted on the host when batches are collated, loss sums stay on the
device, and one all-reduce carries every rank's counts and sums. In fp16 an update whose
gradients overflowed is skipped by the loss scaler and, as in fairseq, does not count (the
caller advances neither the schedule nor the step count)."""

from __future__ import annotations

import inspect
import math
from typing import TYPE_CHECKING, Any

import torch

from depnmt.core.device import autocast, grad_scaler
from depnmt.core.log import info
from depnmt.model.transformer import TransformerNMT, label_smoothed_nll
from depnmt.training import distributed as dist
from depnmt.training.compiled import Compiled

if TYPE_CHECKING:
    from depnmt.training.config import TrainOptions


class Updater:
    """The optimizer, learning-rate schedule and loss scaler of ``model`` on ``device`` in
    ``amp`` (an autocast dtype, None for fp32), and one update with them (:meth:`step`)
    through ``net``: the model, or its DDP wrapper once the trainer has made it
    (:meth:`use`); with ``--compile`` the forward pass and loss run compiled
    (``compiled``: :class:`~depnmt.training.compiled.Compiled`, which counts the compiles)."""

    def __init__(self, model: TransformerNMT, device: torch.device, amp: torch.dtype | None,
                 training: TrainOptions):
        self.model, self.device, self.amp, self.training = model, device, amp, training
        self.compiled = Compiled(training.compile)
        self.use(model)
        self.loss = self.compiled.loss(label_smoothed_nll)
        self.optimizer = adam(model.parameters(), training.lr, device)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: inverse_sqrt(s, training.warmup))
        self.rate = self.scheduler.get_last_lr()[0]     # of the last update (:attr:`lr`)
        self.scaler = grad_scaler(device, amp)
        self.loss_scale = self.scaler.get_scale()      # fp16: drops when a step is skipped

    def use(self, net: torch.nn.Module) -> None:
        """Train through ``net`` (the model or its DDP wrapper; compiled with ``--compile``:
        the DDP wrapper, not the module inside it, as torch documents)."""
        self.net = net
        self.forward = self.compiled.forward(net)

    def step(self, batches: list) -> dict[str, Any]:
        """One optimizer update over this rank's ``update_freq`` batches; the loss is normalised
        per target token of the whole update (every rank's batches), so the gradients are those
        of one process that saw all of them. The returned statistics are over all ranks;
        ``stepped`` is False when fp16 loss scaling found inf/NaN gradients and skipped the
        update (:meth:`optimizer_step`).

        One host synchronisation per update (in fp16 one more, for the loss scale, right
        after it): the token counts are the host's (the batches counted them when they were
        collated), the loss sums stay on the device until the update is done, and the counts
        and sums of every rank travel in one all-reduce."""
        self.model.train()
        counts = [sum(b.n_tokens for b in batches), sum(b.n_src_tokens for b in batches)]
        norm = self.loss_norm(counts[0])
        # copied to the GPU before this update queues any work (a copy from pageable memory
        # waits until the queue is empty)
        counted = torch.tensor(counts, dtype=torch.float64).to(self.device)
        sums: dict[str, torch.Tensor] = {}
        for i, batch in enumerate(batches):
            with dist.sync_gradients(self.net, now=i == len(batches) - 1):
                for name, value in self.backward(batch.to(self.device), norm).items():
                    sums[name] = sums[name] + value if name in sums else value
        names = list(sums)                      # the same order on every rank
        totals = dist.all_reduce_sum(torch.cat([counted, torch.stack([sums[k] for k in names])]))
        if dist.world_size() > 1:               # DDP averaged Σ_r objective_r / norm
            self.scale_gradients(dist.world_size() * norm / totals[0])
        self.rate = self.optimizer.param_groups[0]["lr"]      # what this update steps with
        stepped = self.optimizer_step()
        tokens, src_tokens, *values = totals.tolist()       # the update's one host sync
        if stepped:
            self.scheduler.step()
        sums = {k: v / tokens for k, v in zip(names, values)}
        return {"loss": sums.pop("loss"), "nll": sums.pop("nll"), "tokens": int(tokens),
                "src_tokens": int(src_tokens), "aux": sums, "stepped": stepped}

    def loss_norm(self, tokens: int) -> float:
        """What each rank divides its summed objective by before the backward: in one
        process the update's target tokens (the loss per token); with several, a number every
        rank knows without asking the others (``--max-tokens × --update-freq``), and
        :meth:`scale_gradients` turns the averaged gradients into per-token ones once the
        ranks' token counts are summed (in the update's one all-reduce)."""
        if dist.world_size() == 1:
            return float(tokens)
        return float(self.training.max_tokens * self.training.update_freq)

    def scale_gradients(self, factor: torch.Tensor) -> None:
        """Multiply every gradient by ``factor`` (a 0-dim tensor on the device: no sync)."""
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        if grads:
            torch._foreach_mul_(grads, factor.to(grads[0].dtype))

    def backward(self, batch, norm: float) -> dict[str, torch.Tensor]:
        """Forward and backward of one batch, the objective divided by ``norm``; returns the
        batch's summed ``loss``, ``nll`` and auxiliary losses (each its mean × target tokens)
        as 0-dim float64 tensors on the device (read once per update)."""
        with autocast(self.device, self.amp):
            logits, extras = self.forward(batch.src, batch.tgt_in, batch.src_feats,
                                          batch.tgt_feats)
        loss, nll = self.loss(logits, batch.tgt_out, self.training.label_smoothing)
        objective, n = loss, batch.n_tokens
        sums = {"loss": loss.detach().double(), "nll": nll.detach().double()}
        # schemes' auxiliary losses (e.g. DBSA, Deguchi et al. Eq. 18): + λ · mean per token
        for name, aux in extras.losses.items():
            sums[name] = aux.value.detach().double() * n
            if aux.weight:
                objective = objective + aux.weight * aux.value * n
        self.scaler.scale(objective / norm).backward()
        return sums

    def optimizer_step(self) -> bool:
        """Clip (``--clip-norm``), step and update the AMP scale; False when the fp16 loss
        scaler found inf/NaN gradients and skipped the step (its scale then drops). A skipped
        step does not count, as in fairseq: the learning-rate schedule does not advance (nor,
        by the caller, ``progress.step``: ``--max-steps``, ``--valid-every``); the update's
        batches are consumed."""
        if self.training.clip_norm > 0:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.training.clip_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        if not self.scaler.is_enabled():
            return True
        scale, self.loss_scale = self.loss_scale, self.scaler.get_scale()   # fp16 only: a
        return self.loss_scale >= scale         # sync after the step (GradScaler.step has one)

    def restore_schedule(self, saved: dict) -> None:
        """Continue the saved schedule (``saved``: its state) at the update it reached, with
        this run's ``--lr`` as the peak and its ``--warmup``: ``--resume --lr X`` trains on
        at X's schedule (the saved state holds the rate the run started with, which would
        otherwise win over the flag), and the same ``--lr`` gives the saved rates bit for
        bit. Says so when the peak changes."""
        self.scheduler.load_state_dict(saved)
        before, peak = self.scheduler.base_lrs[0], self.training.lr
        step = self.scheduler.last_epoch
        rate = peak * inverse_sqrt(step, self.training.warmup)   # as LambdaLR computes it
        groups = self.optimizer.param_groups
        for group in groups:
            group["initial_lr"], group["lr"] = peak, rate
        self.scheduler.base_lrs = [peak] * len(groups)
        self.scheduler._last_lr = [rate] * len(groups)
        if before != peak:
            info(f"--lr {peak:g}: the learning rate schedule continues at update {step + 1} "
                 f"with this peak (the run trained with {before:g} so far)")

    def restore_scaler(self, saved: dict) -> None:
        """The saved loss scale, when both runs scale the loss (fp16). A run saved without
        loss scaling (fp32, bf16: its state is empty) resumed in fp16 starts a fresh scale; a
        run saved in fp16 resumed without scaling drops it."""
        if self.scaler.is_enabled() and not saved:
            info("the checkpoint was saved without fp16 loss scaling: starting a fresh loss "
                 f"scale ({self.scaler.get_scale():g})")
        else:
            self.scaler.load_state_dict(saved)      # a disabled scaler ignores it
        self.loss_scale = self.scaler.get_scale()

    @property
    def lr(self) -> float:
        """The learning rate the last update stepped with (the scheduler's own last rate,
        ``get_last_lr``, is the next update's: one update of the warm-up ahead)."""
        return self.rate


def inverse_sqrt(step: int, warmup: int) -> float:
    """LR factor: linear warm-up to 1 at ``warmup``, then ``sqrt(warmup / step)``."""
    step = max(step, 1)
    return min(step / warmup, math.sqrt(warmup / step)) if warmup > 0 else 1.0 / math.sqrt(step)


def adam(params, lr: float, device: torch.device) -> torch.optim.Adam:
    """Adam (0.9, 0.98, 1e-9) as fast as ``device`` runs it (:func:`adam_kernel`)."""
    return torch.optim.Adam(params, lr=lr, betas=(0.9, 0.98), eps=1e-9, **adam_kernel(device))


def adam_kernel(device: torch.device) -> dict[str, bool]:
    """On CUDA the fused Adam (one kernel for every parameter; it also takes the fp16 loss
    scaler's inf check without a host sync) where this torch has it, else the foreach one;
    on the CPU torch's default (the numbers the CPU runs have always had)."""
    if device.type != "cuda":
        return {}
    fused = "fused" in inspect.signature(torch.optim.Adam).parameters
    return {"fused": True} if fused else {"foreach": True}
