"""Written like accelerate's run_me.py: Accelerator() and prepare(); on CPU accelerate forms
a group only with ACCELERATE_USE_CPU set (`accelerate launch --cpu` sets it)."""

import torch
from accelerate import Accelerator

accelerator = Accelerator()
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
loss = model(torch.randn(8, 4)).pow(2).mean()
accelerator.backward(loss)
optimizer.step()
print(
    f"accelerate processes {accelerator.num_processes} index {accelerator.process_index}",
    flush=True,
)
