"""plugins/module_utils/peers.py: host_vars, the one way the filters read the hosts they are given
(the filters themselves, with their AnsibleFilterError, are tested with their logic's tests)."""
import pytest

from ansible_collections.laguna.spark.plugins.module_utils.peers import host_vars

HOSTVARS = {"spark-1": {"laguna_roce_ip": "10.0.0.1"}, "spark-2": {}, "broken": ["not", "a", "mapping"]}


class Refused(Exception):
    pass


def test_each_host_comes_with_its_variables_in_order():
    assert list(host_vars(("spark-2", "spark-1"), HOSTVARS)) == [
        ("spark-2", {}), ("spark-1", {"laguna_roce_ip": "10.0.0.1"})]
    assert list(host_vars([], HOSTVARS)) == []


@pytest.mark.parametrize("hosts", ["spark-1", b"spark-1", 3, None])
def test_a_string_or_a_scalar_is_refused_at_once_naming_the_input(hosts):
    with pytest.raises(Refused, match="^flt: the peers must be a list of inventory host names$"):
        host_vars(hosts, HOSTVARS, Refused, "flt", "the peers")  # before any iteration
    with pytest.raises(ValueError, match="^the input must be a list of inventory host names$"):
        host_vars(hosts, HOSTVARS)


def test_an_unknown_host_or_variables_that_are_not_a_mapping_raise_when_their_turn_comes():
    nodes = host_vars(["spark-1", "spark-9"], HOSTVARS, Refused, "flt")
    assert next(nodes) == ("spark-1", {"laguna_roce_ip": "10.0.0.1"})
    with pytest.raises(Refused, match="^flt: spark-9 is not in the inventory$"):
        next(nodes)
    with pytest.raises(ValueError, match="^the hostvars of broken are not a mapping$"):
        list(host_vars(["broken"], HOSTVARS))
