# The shipped base assistant's distillation options (its card, whisper_spec/assistants/base/README.md,
# has the full command; benchmarks/distill_espeak.sh makes it), for the scripts that train it again with
# other audio; their extra arguments go after these and win. Sourced, not run.
SHIPPED_RECIPE=(--init-layers 0,2,5 --draft-vocab 20480 --steps 600 --threads 2 --join 5 --augment 1 --shifts 2
  --balance 0.5)
