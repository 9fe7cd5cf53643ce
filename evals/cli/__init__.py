"""The suite's commands, one module each (`evals.commands` wires them into `memkit`)."""
