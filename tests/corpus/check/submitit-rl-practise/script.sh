import submitit

def add(a, b):
    return a + b

executor = submitit.AutoExecutor(folder="log_test")
executor.update_parameters(timeout_min=60, gpus_per_node=1, tasks_per_node=1, cpus_per_task=10)
job = executor.submit(add, 5, 7)
print(job.job_id)
assert job.result() == 12
