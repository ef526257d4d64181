// Clusters: a session on the nodes of a cluster, and the credentials
// (`shardflow certs`) LocalCluster and users make.
#include <memory>
#include <string>
#include <vector>

#include "python/src/bindings.h"
#include "python/src/common.h"
#include "python/src/py_graph.h"
#include "python/src/py_session.h"
#include "shardflow/cluster.h"

namespace sf {
namespace python {

void BindCluster(py::module_& m) {
  m.def("cluster_session", [](py::object graph, const std::string& address, const std::string& tls_dir,
                              const std::string& tls_name, bool insecure, int tasks, int max_tasks,
                              int request_timeout_ms, const std::string& checkpoint_dir, bool elastic,
                              int step_progress_timeout_ms) {
          PyGraph& g = graph.cast<PyGraph&>();
          Check(g.g->status());
          ClusterOptions o;
          o.address = address;
          o.tls_dir = tls_dir;
          o.tls_name = tls_name;
          o.insecure = insecure;
          o.tasks = tasks;
          o.max_tasks = max_tasks;
          o.request_timeout_ms = request_timeout_ms;
          o.step_progress_timeout_ms = step_progress_timeout_ms;
          o.checkpoint_dir = checkpoint_dir;
          o.elastic = elastic;
          Result<std::unique_ptr<ClusterSession>> r = Status::OK();
          {
            py::gil_scoped_release nogil;
            r = ClusterSession::Connect(*g.g, o);
          }
          auto s = std::make_unique<PySession>();
          s->graph = graph;
          s->s = Take(std::move(r));
          return s;
        });
  m.def("init_cluster_credentials", [](const std::string& dir) { Check(InitClusterCredentials(dir)); });
  m.def("issue_cluster_credential", [](const std::string& dir, const std::string& role, const std::string& name,
                                       const std::vector<std::string>& hosts, const std::string& ns) {
    Check(IssueClusterCredential(dir, role, name, hosts, ns));
  }, py::arg("dir"), py::arg("role"), py::arg("name"), py::arg("hosts") = std::vector<std::string>{},
     py::arg("namespace") = "");
  // The etcd a LocalCluster's nodes register in (shardflow/cluster.h LocalEtcd);
  // dropping the object stops it.
  py::class_<LocalEtcd, std::unique_ptr<LocalEtcd>>(m, "LocalEtcd")
      .def(py::init([](const std::string& tls_dir, bool insecure) {
             Result<std::unique_ptr<LocalEtcd>> r = Unavailable("not started");
             {
               py::gil_scoped_release nogil;
               r = LocalEtcd::Start(tls_dir, insecure);
             }
             return Take(std::move(r));
           }),
           py::arg("tls_dir"), py::arg("insecure") = false)
      .def_property_readonly("endpoint", &LocalEtcd::endpoint);
}

}  // namespace python
}  // namespace sf
