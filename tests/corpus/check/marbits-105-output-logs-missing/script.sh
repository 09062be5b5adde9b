#!/bin/bash
#SBATCH --job-name=contig_extraction
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=12
#SBATCH --output=Hydrurus/data/plastid/logs/extract_%A_%a.out
#SBATCH --error=Hydrurus/data/plastid/logs/extract_%A_%a.err
#SBATCH --array=1-3%3

module load seqkit
SAGS_LIST="Hydrurus/list.txt"
SAG=$(awk "NR == ${SLURM_ARRAY_TASK_ID}" "${SAGS_LIST}")
seqkit grep -f "Hydrurus/data/plastid/${SAG}.ids" "${SAG}.fasta" > "${SAG}_plastid.fasta"
