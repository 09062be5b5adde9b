#!/usr/bin/env python3
import submitit
from train import train

executor = submitit.AutoExecutor(folder="logs", slurm_max_num_timeout=10)
executor.update_parameters(slurm_gres='gpu:a40:1', cpus_per_task=16, slurm_time=580)
job = executor.submit(train)
print(job.job_id)
