from dagster_reconf.core.spark.session import DRIVER_THREAD_STACK, spark_conf_for
from dagster_reconf.core.spec import StreamSpec


def spec(**fields) -> StreamSpec:
    return StreamSpec(name="s", entrypoint="m:f", instrumentation=False, **fields)


def test_driver_threads_get_a_deep_stack():
    assert spark_conf_for(spec(), None)["spark.driver.extraJavaOptions"] == DRIVER_THREAD_STACK


def test_the_users_driver_java_options_are_kept_after_ours_so_theirs_win():
    own = "-Dlog4j.configurationFile=/etc/spark/log4j2.xml -Xss64m"
    conf = spark_conf_for(spec(spark_conf={"spark.driver.extraJavaOptions": own}), None)
    assert conf["spark.driver.extraJavaOptions"] == f"{DRIVER_THREAD_STACK} {own}"


def test_a_drivers_temporary_files_go_to_its_own_folder_unless_the_user_names_one(tmp_path):
    temp = tmp_path / "my home" / "tmp" / "driver-42"  # a space: quoted for Spark's option splitting
    conf = spark_conf_for(spec(), None, temp)
    assert conf["spark.local.dir"] == str(temp)
    assert conf["spark.driver.extraJavaOptions"] == f"{DRIVER_THREAD_STACK} -Djava.io.tmpdir='{temp}'"

    theirs = spark_conf_for(
        spec(spark_conf={"spark.local.dir": "/scratch", "spark.driver.extraJavaOptions": "-Djava.io.tmpdir=/scratch"}),
        None,
        temp,
    )
    assert theirs["spark.local.dir"] == "/scratch"
    assert theirs["spark.driver.extraJavaOptions"].endswith("-Djava.io.tmpdir=/scratch"), "the last -D wins in Java"


def test_an_interrupted_python_tasks_worker_is_killed_soon_unless_the_user_says_otherwise():
    assert spark_conf_for(spec(), None)["spark.python.task.killTimeout"] == "100ms"
    theirs = spark_conf_for(spec(spark_conf={"spark.python.task.killTimeout": "5s"}), None)
    assert theirs["spark.python.task.killTimeout"] == "5s"
