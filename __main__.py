"""`python -m tessel`: the umbrella command (`python -m tessel compile model.onnx -o m.cl.tsl`)."""

from tessel.cli.main import main

if __name__ == "__main__":
    main(prog_name="tessel")
