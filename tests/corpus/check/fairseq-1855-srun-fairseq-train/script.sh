srun --nodes 2 --gres=gpu:8 --ntasks-per-node 1 fairseq-train --distributed-port 12345 --no-save --task dummy_masked_lm --arch dummy_model --optimizer sgd --lr 1e-4 --max-epoch 1
