# The shipped base assistant's distillation options (its card, whisper_spec/assistants/base/README.md,
# has the full command), for the scripts that train it again with other audio. Sourced, not run.
SHIPPED_RECIPE=(--init-layers 0,2,5 --draft-vocab 16384 --steps 500 --threads 2 --join 5 --augment 1 --shifts 2
  --balance 0.5)
