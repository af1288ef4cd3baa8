"""ffnbench.training.step: the one optimizer step the training module and the benchmarks' loop share."""

import torch

from ffnbench.training.step import clip_gradients, train_step


class Quadratic(torch.nn.Module):
    """loss = mean((w·x − y)²), with a z_loss term that the step passes only where it is set."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
        self.z_losses: list[float] = []

    def forward(self, x, y, z_loss=None):
        if z_loss is not None:
            self.z_losses.append(z_loss)
        return ((x @ self.w - y) ** 2).mean()


def _parts(model):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (step + 1))
    return optimizer, scheduler


def test_a_step_is_forward_backward_clip_update_and_schedule():
    model, x, y = Quadratic(), torch.tensor([[1.0, 1.0]]), torch.tensor([3.0])
    optimizer, scheduler = _parts(model)

    def step():
        clip_gradients(model.parameters(), 1.0)
        optimizer.step()

    loss = train_step(model, x, y, optimizer=optimizer, scheduler=scheduler, backward=torch.Tensor.backward, step=step)
    # d/dw (w·x − y)² = 2(w·x − y)·x = 2·(−4)·[1, 1], norm 8√2 → clipped to norm 1: [−1, −1]/√2
    expected = torch.tensor([1.0, -2.0]) + 0.1 * torch.tensor([1.0, 1.0]) / 2**0.5
    assert loss.item() == 16.0 and torch.allclose(model.w.detach(), expected)
    assert model.w.grad is None  # zeroed (set to None) after the update
    assert scheduler.last_epoch == 1 and optimizer.param_groups[0]["lr"] == 0.05
    assert model.z_losses == []  # z_loss 0: the plain call


def test_read_loss_can_stop_a_step_before_its_backward():
    model, x, y = Quadratic(), torch.tensor([[1.0, 1.0]]), torch.tensor([3.0])
    optimizer, scheduler = _parts(model)
    seen = []
    out = train_step(model, x, y, optimizer=optimizer, scheduler=scheduler, backward=torch.Tensor.backward,
                     step=optimizer.step, z_loss=1e-4, read_loss=lambda loss: seen.append(loss.item()) or True)
    assert out is None and seen == [16.0] and model.z_losses == [1e-4]
    assert torch.equal(model.w.detach(), torch.tensor([1.0, -2.0])) and scheduler.last_epoch == 0  # nothing moved


def test_clipping_zero_or_none_leaves_the_gradient_and_returns_its_norm():
    p = torch.nn.Parameter(torch.zeros(2))
    for max_norm in (0.0, None):
        p.grad = torch.tensor([3.0, 4.0])
        assert clip_gradients([p], max_norm).item() == 5.0 and torch.equal(p.grad, torch.tensor([3.0, 4.0]))
