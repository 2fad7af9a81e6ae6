# Data: the tiny config generates every data set from its seed; real configs download their
# Hugging Face data sets once, on the login node, into the same files.
from stages.lib.data.schema import FILES as DATA_FILES


if "tiny" in config["data"]:

    rule tiny_data:
        output:
            expand(data_file("{name}"), name=DATA_FILES),
            manifest=result("data", "manifest.json"),
        log:
            log_file("tiny_data"),
        benchmark:
            benchmark_file("tiny_data")
        params:
            seed=config["seed"],
            out=lambda wildcards, output: os.path.dirname(output.manifest),
            args=stage_args(config["data"]["tiny"]),
        localrule: True
        container:
            image("cpu")
        shell:
            "python -m stages.data.tiny --output_dir {params.out} --seed {params.seed} {params.args} > {log} 2>&1"

else:

    rule prepare_data:
        # Downloads (needs internet: a local rule), maps rows to the schemas, decontaminates.
        output:
            expand(data_file("{name}"), name=config["data"]["hub"]["sets"]),
            manifest=result("data", "manifest.json"),
        log:
            log_file("prepare_data"),
        benchmark:
            benchmark_file("prepare_data")
        params:
            online=ONLINE,
            seed=config["seed"],
            out=lambda wildcards, output: os.path.dirname(output.manifest),
            sources=shlex.quote(json.dumps(config["data"]["hub"]["sets"])),
            args=stage_args(config["data"]["hub"], exclude=("sets",)),
        localrule: True
        container:
            image("cpu")
        shell:
            "{params.online} python -m stages.data.prepare --output_dir {params.out} --sources {params.sources}"
            " --seed {params.seed} {params.args} > {log} 2>&1"
