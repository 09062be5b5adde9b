"""``python -m noderun.node``: the per-node entry's command line, rendered into sbatch scripts
and srun commands. The entry lives in ``noderun.backends.node_entry`` (the pure per-node spec
in ``noderun.topology.node_spec``); this module keeps the command's name stable."""

from noderun.backends.node_entry import main

if __name__ == "__main__":
    main()
